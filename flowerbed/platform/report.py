"""Reports (placeholder)."""

def add_commands(subparsers, commands):
    """Stub."""
