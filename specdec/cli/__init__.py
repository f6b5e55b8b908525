"""The command line's arguments and sub-commands."""
