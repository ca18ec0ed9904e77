"""The control log: its pure fold (what the events mean), its reader and fenced writer, its CLI."""
