"""The TUI's widgets; each module holds one widget and its small helpers."""
