"""Generated stubs of Talos's ``storage`` proto package (``storage.StorageService``, herder's subset)."""
