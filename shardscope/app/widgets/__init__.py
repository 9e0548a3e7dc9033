"""The explorer's reusable widgets: sidebar, status line, error panel, help screen, text rows."""
