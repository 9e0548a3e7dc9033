"""The projection panel of the Timings tab: pick an interconnect preset and the rings.

By default each compiled collective is costed on a ring of its own replica group of the analysed
mesh, as ``report --project PRESET`` costs it (an all-reduce over ``data`` of a data=4 x model=2
mesh: a ring of 4); a device count picked puts every collective on one ring of that many devices,
as ``--project PRESET:DEVICES`` does. The projection's title says which.

Projecting is a pure function of the analysis' collectives (no JAX), so it runs on the UI
thread when a choice changes. With a target (a TPU slice or GPUs), each plan's compiled collectives
there (what its compiler runs) are projected too, onto the target's own interconnect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widget import Widget
from textual.widgets import Label, Select, Static

from shardscope.costmodel.interconnects import PRESETS, preset
from shardscope.pipeline.projections import NoAnalysedMesh, project
from shardscope.render.projection import MEASURED, lines
from shardscope.render.targets import interconnect_sentence

if TYPE_CHECKING:
    from shardscope.pipeline.analysis import Analysis
    from shardscope.pipeline.comparison import Comparison

DEVICE_CHOICES = (2, 4, 8, 16, 64, 256, 1024)
"""The device counts offered for one ring over every device (``--project PRESET:DEVICES``)."""
OWN_GROUPS = None
"""The rings' choice with no count, the default: each collective on its own replica group
(``--project PRESET``, the device count :func:`~shardscope.pipeline.projections.project` is not given)."""
OWN_GROUPS_LABEL = "own groups"
NO_GROUPS = "No compiled module to read each collective's group from: pick a device count to project onto."


class ProjectionPanel(Widget):
    """Each plan's communication projected onto the chosen interconnect, each collective on its
    own group or on one ring of the chosen device count."""

    DEFAULT_CSS = """
    ProjectionPanel {
        height: auto;
        padding: 1 0 0 0;
    }
    ProjectionPanel #projection-choices {
        height: 3;
    }
    ProjectionPanel .projection-label {
        padding: 1 1 0 1;
    }
    ProjectionPanel #projection-preset {
        width: 30;
    }
    ProjectionPanel #projection-devices {
        width: 22;
    }
    ProjectionPanel #projection-body {
        height: auto;
        padding: 0 1;
    }
    """

    def __init__(self, *, measurements_hidden: bool = False, **kwargs: Any) -> None:  # Textual's widget keywords, passed on
        super().__init__(**kwargs)
        self.analysis: Analysis | None = None
        self.comparison: Comparison | None = None  # the pair the Timings tab shows (b/c); None: the analysis's
        self.measurements_hidden = measurements_hidden

    def compose(self) -> ComposeResult:
        """The two pickers and the projection's lines."""
        with Horizontal(id="projection-choices"):
            yield Label("Project onto", classes="projection-label")
            yield Select([(p.name, p.name) for p in PRESETS], value=PRESETS[0].name, allow_blank=False,
                         id="projection-preset", prompt="interconnect")
            yield Label("with", classes="projection-label")
            yield Select([(OWN_GROUPS_LABEL, OWN_GROUPS), *((f"{n} devices", n) for n in DEVICE_CHOICES)],
                         value=OWN_GROUPS, allow_blank=False, id="projection-devices", prompt="devices")
        yield Static(id="projection-body")

    def show_projection(self, analysis: Analysis, comparison: Comparison | None = None) -> None:
        """Project ``analysis`` with the current choices; the ratio line is about ``comparison``
        (a :class:`~shardscope.pipeline.comparison.Comparison`; None: the analysis's default pair)."""
        self.analysis = analysis
        self.comparison = comparison
        self._update_projection()

    @on(Select.Changed)
    def _choice_changed(self) -> None:
        self._update_projection()

    @property
    def plain(self) -> str:
        """The projection as plain text."""
        return str(self.query_one("#projection-body", Static).render())

    def _update_projection(self) -> None:
        if self.analysis is None or not self.is_mounted:
            return
        link = preset(str(self.query_one("#projection-preset", Select).value))
        devices = self.query_one("#projection-devices", Select).value
        assert devices is OWN_GROUPS or isinstance(devices, int)  # made with allow_blank=False: always a choice
        try:
            projection = project(self.analysis, link, None if devices is OWN_GROUPS else devices)
        except NoAnalysedMesh:  # only traced: no groups to read
            self.query_one("#projection-body", Static).update(Text(NO_GROUPS, "dim"))
            return
        text = lines(self.analysis, projection, self.comparison)
        if self.measurements_hidden:
            text = [line.split(MEASURED)[0] for line in text]
        body = Text("\n".join(text))
        body.stylize("bold", 0, len(text[0]))
        body.append(f"\nsource: {link.source}", "dim")
        for line in target_lines(self.analysis):
            body.append(f"\n{line}")
        self.query_one("#projection-body", Static).update(body)


def target_lines(analysis: Analysis) -> list[str]:
    """Each target's compiled collectives on its own interconnect (its machine's model), or why not."""
    said = []
    for target in analysis.target_names:
        own = interconnect_sentence(target, [(plan.name, on_target) for plan, on_target in analysis.on_target(target)])
        said.append(own or f"{target}: shardscope has no interconnect figures for this machine to cost its compiled "
                           "collectives on (report --target ... --project PRESET or --link BW,LATENCY projects them "
                           "onto a ring of your own).")
    return said
