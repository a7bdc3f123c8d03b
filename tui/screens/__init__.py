"""The TUI's screens: chat (the default), agent chains, and the modal dialogs."""
