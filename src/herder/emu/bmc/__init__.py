"""Emulated BMCs (``herder emu run --bmc``): each machine's baseboard management controller, as one
Redfish service on the emulator's control address with a System and a Manager per machine.

- ``state``: what a BMC keeps (boot override, virtual media, how often it booted its machine);
- ``firmware``: what the machine boots when it is powered on, as its firmware decides from that state;
- ``http``: Redfish over HTTP, apart from any resource (errors, headers, methods, If-Match);
- ``sessions``: its one account, by basic authentication or sessions;
- ``redfish``: the Redfish resources and actions (power, boot override, virtual media, sessions);
- ``service``: the HTTPS listener and its certificate.

It knows of a machine only what a BMC does: its identity, hardware and power (``redfish.ManagedMachine``).
"""
