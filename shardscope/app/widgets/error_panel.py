"""The error panel: what went wrong and what to do next. The results under it stay visible."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from shardscope.app.widgets.updates import update_if_changed


class ErrorPanel(Vertical):
    """Hidden until :meth:`show_error`; ``escape`` (outside an input) hides it again."""

    DEFAULT_CSS = """
    ErrorPanel {
        display: none;
        height: auto;
        max-height: 12;
        border: round $error;
        border-title-color: $text-error;
        padding: 0 1;
        background: $error 10%;
    }
    ErrorPanel.-visible { display: block; }
    ErrorPanel #error-message { color: $text-error; text-style: bold; }
    ErrorPanel #error-hint { color: $text-muted; }
    """

    message: str = ""
    hint: str | None = None

    def compose(self) -> ComposeResult:
        """The message line and the hint line."""
        yield Static(id="error-message", markup=False)
        yield Static(id="error-hint", markup=False)

    def on_mount(self) -> None:
        """Title the border."""
        self.border_title = "error"
        self.border_subtitle = "esc to hide"

    def show_error(self, message: str, hint: str | None = None) -> None:
        """Show ``message`` and, when given, ``hint``."""
        self.message = message
        self.hint = hint
        update_if_changed(self.query_one("#error-message", Static), message)
        update_if_changed(self.query_one("#error-hint", Static), f"hint: {hint}" if hint else "")
        self.add_class("-visible")

    def clear(self) -> None:
        """Hide the panel."""
        self.remove_class("-visible")

    @property
    def shown(self) -> bool:
        """True while an error is on screen."""
        return self.has_class("-visible")

