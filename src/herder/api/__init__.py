"""herder's API server: its kinds on ``krm``, with authentication, authorization and audit."""
