"""The explorer's exports: the compared plans' diff (``e``) and the palette's Screenshot.

A part of :class:`~shardscope.app.app.ShardscopeApp` (its base class): each writes a new file
atomically in the export directory, never over one, and says where; a failure is the error
panel's, and the results stay on screen.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.app import App
from textual.widgets import TabbedContent

from shardscope.app.screenshots import save_svg, stable_svg
from shardscope.errors import ShardscopeError
from shardscope.config.settings import Settings
from shardscope.render.exports import write_new
from shardscope.render.text import diff_text


class ExportActions(App[int]):
    """The app's export and screenshot actions."""

    if TYPE_CHECKING:  # what the app provides (ShardscopeApp)
        settings: Settings
        analysis: Any  # as the app holds it (an Analysis once a run is done)
        export_dir: Path | None
        last_export: Path | None

        @property
        def comparison(self) -> Any: ...  # as the app gives it

        def _show_error(self, message: str, hint: str | None, *, refused: bool = False,
                        failed: str | None = None) -> None: ...

    def action_export(self) -> None:
        """Write the diff of the latest analysis to a new file and say where."""
        directory = self.export_directory
        try:
            text = diff_text(self.analysis, self.comparison)
            directory.mkdir(parents=True, exist_ok=True)  # made if needed, as the palette's Screenshot makes it
            path = write_new(directory, self.analysis.export_stem(self.comparison), ".diff", text)
        except ShardscopeError as exc:
            self._show_error(exc.message, exc.hint, failed="the export")
            return
        except OSError as exc:
            self._show_error(f"Could not write the diff in {directory}: {exc.strerror or exc}",
                             "check --export-dir is a writable directory", failed="the export")
            return
        self.last_export = path
        self.notify(str(path), title="Diff exported")

    @property
    def export_directory(self) -> Path:
        """Where exports and screenshots go: ``--export-dir``, else the working directory (absolute)."""
        return (self.export_dir or Path.cwd()).absolute()

    def export_screenshot(self, *, title: str | None = None, simplify: bool = False) -> str:
        """Textual's SVG of the screen, its class names made from what is drawn (:func:`stable_svg`),
        so the same screen always gives the same file (``make screenshots``, the snapshot tests)."""
        return stable_svg(super().export_screenshot(title=title, simplify=simplify))

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """The palette's Screenshot: an SVG of the screen in the export directory, under a free name.

        Textual's own saves into ``~/Downloads`` and fails with a clipped message when there is
        none. Here the directory is made if needed, the file is written atomically and never
        replaces one (``rnn-timings.svg``, then ``rnn-timings-1.svg``), and the notice gives the
        full path. Returns the path written (None when it failed: the error panel says why).
        """
        directory = Path(path).expanduser().absolute() if path else self.export_directory
        stem = Path(filename).stem if filename else f"{self.settings.path.stem}-{self.query_one(TabbedContent).active}"
        try:
            written = save_svg(directory, stem, self.export_screenshot(title=f"shardscope {stem}"))
        except ShardscopeError as exc:
            self._show_error(f"Could not save the screenshot: {exc.message}", exc.hint, failed="the screenshot")
            return None
        except OSError as exc:
            self._show_error(f"Could not save the screenshot in {directory}: {exc.strerror or exc}",
                             "check --export-dir names a directory you can write to", failed="the screenshot")
            return None
        self.notify(str(written), title="Screenshot saved", timeout=10)
        return str(written)
