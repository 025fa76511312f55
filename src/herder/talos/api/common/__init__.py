"""Generated stubs of Talos's ``common`` proto package (the part the machine API uses)."""
