"""SideroLink's join API (``sidero.link.ProvisionService``) as Talos machines call it."""
