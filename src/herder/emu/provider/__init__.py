"""The emulator's infra provider: emulated machines made per MachineRequest in a running emulator."""

from herder.emu.provider.provider import EmulatedMachine, EmulatorConfig, EmulatorProvider

__all__ = ["EmulatedMachine", "EmulatorConfig", "EmulatorProvider"]
