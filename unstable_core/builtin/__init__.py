"""The core's own plugins, one module per component kind, registered before any entry point."""
