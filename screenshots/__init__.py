"""SVG screenshots of every tab of the explorer, made by ``make screenshots`` (``screenshots/make.py``)."""
