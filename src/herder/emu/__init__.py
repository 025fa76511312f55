"""The Talos emulator: many emulated Talos machines in one process."""
