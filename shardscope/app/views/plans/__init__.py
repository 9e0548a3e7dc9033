"""The Plans tab: every plan's program as a tree, side by side, with next/previous collective."""
