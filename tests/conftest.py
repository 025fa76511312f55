"""Settings of the whole suite, made before anything imports herder."""

import os

# Every read of an object shared between readers checks first that no reader changed it (see
# ``herder.state.stored.Stored.shared``); servers and emulators the tests start inherit it.
os.environ["HERDER_CHECK_SHARED"] = "1"
