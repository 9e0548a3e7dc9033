"""The sidebar: which demo function, on which mesh (1-D, or named axes such as data=4,model=2, with
the axes the batch is split over), in what chunks, and the TPU slice (``tpu:v5e:2x2``) every plan
or program is also compiled for.

Only valid choices are offered where the demo file says what is valid (device counts that
divide the batch, up to ``--max-devices``); a typed chunk size or axis name is flagged invalid
as you type, and :meth:`Sidebar.requested_settings` refuses it before any run starts.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.validation import Function
from textual.widgets import Input, Label, OptionList, Select, Static, Switch
from textual.widgets.option_list import Option

from shardscope.app.widgets.fields import SettingField
from shardscope.app.widgets.updates import same_content, update_if_changed
from shardscope.errors import SettingsError
from shardscope.targets.registry import parse_target
from shardscope.config.mesh import Mesh, parse_axes
from shardscope.config.settings import (
    DEFAULT_AXIS,
    DEFAULT_DEVICES,
    Settings,
    check_axis_name,
    default_chunk_size,
    divisors,
)
from shardscope.config.shapes import resolve_shapes
from shardscope.sources.demos import carried_over


def _mesh_is_valid(text: str) -> bool:
    """Empty (use the 1-D fields) or ``name=size`` pairs."""
    try:
        return not text.strip() or bool(Mesh.parse(text))
    except SettingsError:
        return False


def _target_is_valid(text: str) -> bool:
    """Empty (the CPU only), ``tpu:TOPOLOGY`` or ``gpu:NAME:DEVICES`` (whether the compiler knows the
    machine is the run's to say)."""
    try:
        return not text.strip() or bool(parse_target(text))
    except SettingsError:
        return False


def _axes_are_valid(text: str) -> bool:
    """Empty (every axis) or axis names separated by commas."""
    try:
        return not text.strip() or bool(parse_axes(text))
    except SettingsError:
        return False


class Sidebar(VerticalScroll):
    """The settings form. Posts :class:`Sidebar.Changed` when a value is committed."""

    DEFAULT_CSS = """
    Sidebar { width: 30; padding: 0 1; background: $panel; border-right: vkey $foreground 20%; }
    Sidebar.-narrow { width: 24; }
    Sidebar.-collapsed { display: none; }
    Sidebar .sidebar-title { margin-top: 1; color: $text-muted; text-style: bold; width: 100%; }
    Sidebar OptionList { height: auto; max-height: 8; }
    Sidebar #description { color: $text-muted; height: auto; }
    Sidebar #chunk-help { color: $text-muted; height: auto; }
    Sidebar #chunk-help.-invalid { color: $text-error; }
    Sidebar #mesh-note { color: $text-muted; height: auto; display: none; }
    Sidebar #mesh-note.-shown { display: block; }
    Sidebar #target-note { color: $text-muted; height: auto; display: none; }
    Sidebar #target-note.-shown { display: block; }
    Sidebar .switch-row { height: auto; margin-top: 1; }
    Sidebar .switch-row Label { padding: 1 0 0 1; width: 1fr; }
    Sidebar #programs-note { display: none; color: $text-muted; height: auto; margin-top: 1; }
    Sidebar.-programs #programs-note { display: block; }
    Sidebar.-programs .plan-setting { display: none; }
    """

    class Changed(Message):
        """A setting was committed (a function picked, a device count chosen)."""

    class RunAsked(Message):
        """Enter in a field: run the sidebar's settings (whether or not run on change is on)."""

    class Edited(Message):
        """A value changed, committed or not (for marking the results on screen stale)."""

    class CandidatePicked(Message):
        """In a program file, a program was picked in the list: compare it as the candidate."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    def __init__(self, settings: Settings, max_devices: int, **kwargs: Any) -> None:  # Textual's widget keywords, passed on
        super().__init__(**kwargs)
        self.max_devices = max_devices
        self.function = settings.function  # None: the first demo in the file
        self.functions: list[str] = []
        self.batches: dict[str, int] = {}
        self._device_choices: list[int] = []
        self._initial = settings
        self.compared: tuple[str, str] | None = None  # a program file's (baseline, candidate)
        self._demo_meshes: dict[str, Mesh | None] = {}  # each demo's own mesh (None: the default s=2)
        # the mesh the sidebar filled in from the demo, while its fields still show it (None: the user's)
        self._auto_mesh: Mesh | None = None
        self._target_devices: dict[str, int] = {}  # each target's device count, once a run has loaded it
        self._devices_before_target: int | None = None  # the picker's count while a target's shows in it

    def compose(self) -> ComposeResult:
        """The form, filled from the starting settings."""
        s = self._initial
        yield Label("Function", classes="sidebar-title", id="functions-title")
        yield OptionList(Option(f"{s.function or '(loading the demo file)'}", disabled=True), id="functions")
        yield Static("", id="description")
        yield Static("", id="programs-note")
        yield Label("Devices (mesh size)", classes="sidebar-title plan-setting")
        counts = list(range(1, self.max_devices + 1))
        self._device_choices = counts
        devices = s.devices if s.devices in counts else counts[-1]
        yield Select([(str(n), n) for n in counts], value=devices, allow_blank=False, id="devices", classes="plan-setting")
        yield Label("Mesh axis name", classes="sidebar-title plan-setting")
        one_axis = len(s.mesh.axes) == 1
        yield SettingField(s.mesh.names[0], id="axis", classes="plan-setting",
                    validators=[Function(_is_axis_name, "not an ASCII identifier")])
        yield Label("Named mesh (optional)", classes="sidebar-title plan-setting")
        yield SettingField("" if one_axis else s.mesh.text(), placeholder="e.g. data=4,model=2", id="mesh", classes="plan-setting",
                    validators=[Function(_mesh_is_valid, "not a mesh: name=size pairs")],
                    tooltip="Named axes with sizes; empty: the 1-D mesh of the two fields above")
        yield Static("", id="mesh-note", classes="plan-setting")
        yield Label("Batch axes (optional)", classes="sidebar-title plan-setting")
        yield SettingField(",".join(s.batch_axes or ()), placeholder="all axes of the mesh", id="batch-axes", classes="plan-setting",
                    validators=[Function(_axes_are_valid, "not a list of axis names")],
                    tooltip="The mesh axes the batch is split over (e.g. data); empty: every axis")
        yield Label("Chunk size (examples/chunk)", classes="sidebar-title plan-setting")
        chunk = "" if s.chunk_size is None else str(s.chunk_size)
        yield SettingField(chunk, placeholder="auto", id="chunk", classes="plan-setting",
                    validators=[Function(self._chunk_is_valid, "not a valid chunk size")])
        yield Static("", id="chunk-help", classes="plan-setting")
        with Horizontal(classes="switch-row plan-setting"):
            yield Switch(False, id="autorun", tooltip="Run again whenever a function or a device count is picked "
                                                      "(Enter in a field always runs)")
            yield Label("run on change")
        yield Label("Target (optional)", classes="sidebar-title")
        yield SettingField(",".join(s.targets), placeholder="e.g. tpu:v5e:2x2 or gpu:h100:8", id="target",
                    validators=[Function(_target_is_valid, "not a target: tpu:TOPOLOGY or gpu:NAME:DEVICES")],
                    tooltip="A TPU slice or GPUs to compile every plan for as well (nothing runs there; "
                            "needs pip install 'shardscope[tpu]' or 'shardscope[gpu]'); empty: the CPU only")
        yield Static("", id="target-note")

    def on_mount(self) -> None:
        """Show the chunk hint for the starting settings."""
        self._update_chunk_help()
        self._update_mesh_fields()

    # -- what the app asks -------------------------------------------------------------

    @property
    def autorun(self) -> bool:
        """True when a committed change should start a run."""
        return self.query_one("#autorun", Switch).value

    @property
    def named_mesh(self) -> bool:
        """True while a named mesh is typed (the user's sizes, kept even when a target is set)."""
        return bool(self.query_one("#mesh", Input).value.strip())

    @property
    def programs(self) -> bool:
        """True while the file is a program file: only the program list applies."""
        return self.has_class("-programs")

    def requested_settings(self, base: Settings) -> Settings:
        """``base`` with the sidebar's choices; raises :class:`SettingsError` when they do not fit.

        A program file has no settings here (each program builds its own mesh): ``base`` as is.
        """
        targets = self._typed_targets()
        if self.programs:
            return base.with_(targets=targets)
        axis = check_axis_name(self.query_one("#axis", Input).value.strip())
        settings = base.with_(
            function=self.function,
            devices=self._devices(),
            axis=axis,
            chunk_size=self._typed_chunk(),
        )
        mesh_text = self.query_one("#mesh", Input).value.strip()
        if mesh_text:
            axes_text = self.query_one("#batch-axes", Input).value.strip()
            settings = settings.with_(mesh=Mesh.parse(mesh_text), batch_axes=parse_axes(axes_text) if axes_text else None)
        if self._mesh_is_the_demos():
            settings = settings.with_(demo_mesh=True)  # the next demo picked brings its own mesh
        settings = settings.with_(targets=targets)
        if targets and not mesh_text and targets[0] not in self._target_devices:
            return settings  # the slice's device count is known once it loads: the run checks the shapes
        batch = self.batches.get(self.function or (self.functions[0] if self.functions else ""))
        if batch is not None:
            resolve_shapes(batch, settings, self.max_devices)
        return settings

    def draft_settings(self, base: Settings) -> Settings | None:
        """What the sidebar shows now, defaults resolved (None while a value is not a number yet).

        Unlike :meth:`requested_settings` nothing is checked: this is for comparing with the
        settings of the results on screen, which have their defaults resolved too.
        """
        try:
            chunk = self._typed_chunk()
        except SettingsError:
            return None
        try:
            targets = self._typed_targets()
        except SettingsError:
            targets = (self.query_one("#target", Input).value.strip(),)  # differs from any target run
        if self.programs:
            return base.with_(targets=targets)
        devices = self._devices()
        if chunk is None:  # auto: the default of the per-device batch (unknown yet: as the results have it)
            per_device = self._per_device_batch()
            chunk = default_chunk_size(per_device) if per_device is not None else base.chunk_size
        draft = base.with_(
            function=self._current_function or base.function,
            devices=devices,
            axis=self.query_one("#axis", Input).value.strip(),
            chunk_size=chunk,
            targets=targets,
        )
        if targets and targets == base.targets and not self.query_one("#mesh", Input).value.strip():
            draft = draft.with_(mesh=base.mesh, batch_axes=base.batch_axes)  # the mesh the slice gave the results
        mesh_text = self.query_one("#mesh", Input).value.strip()
        if mesh_text:
            try:
                axes_text = self.query_one("#batch-axes", Input).value.strip()
                draft = draft.with_(mesh=Mesh.parse(mesh_text), batch_axes=parse_axes(axes_text) if axes_text else None)
            except SettingsError:
                pass  # not a mesh yet: the 1-D fields stand
        return draft

    @property
    def device_choices(self) -> list[int]:
        """The device counts the picker offers."""
        return list(self._device_choices)

    # -- what the app tells ------------------------------------------------------------

    def load_demo(self, functions: list[str], batches: dict[str, int], descriptions: dict[str, str],
                  *, programs: bool = False, devices: int | None = None,
                  meshes: dict[str, Mesh | None] | None = None, demo_mesh: bool = False) -> None:
        """Offer the functions of a (re)loaded demo file and the device counts that fit.

        For a program file (``programs``) the list holds its programs, and a note replaces the
        mesh and chunk settings, which do not apply: ``devices`` CPU devices were started.
        ``meshes`` holds each demo's own mesh; with ``demo_mesh`` (the user gave no mesh) the
        fields show the current demo's, and follow the demo picked until the user edits them.
        """
        self.set_class(programs, "-programs")
        update_if_changed(self.query_one("#functions-title", Label), "Programs" if programs else "Function")
        if programs:
            update_if_changed(self.query_one("#programs-note", Static), Text(
                f"Each program builds its own mesh on the {devices} CPU devices started (--max-devices): "
                "no mesh or chunk settings here.\n"
                "B: baseline, C: candidate; b / c pick the next, Enter makes a program the candidate.", "dim"))
        else:
            self.compared = None
        self.function = carried_over(self.function, self.functions, list(functions))
        self.functions = list(functions)
        self.batches = dict(batches)
        self._descriptions = dict(descriptions)
        self._show_functions()
        first_load = not self._demo_meshes
        self._demo_meshes = dict(meshes or {})
        if demo_mesh and not programs and (first_load or self._mesh_is_the_demos()):
            self._show_demo_mesh()
        self._offer_devices()
        self._update_chunk_help()
        self._update_mesh_fields()

    def show_layouts_only(self, functions: tuple[str, ...]) -> None:
        """A file of ``@shardscope.layouts`` functions only: the function list names them, none
        to pick here (the Layouts tab ranks their layouts)."""
        options = self.query_one("#functions", OptionList)
        options.clear_options()
        options.add_options(Option(f"{name} (layouts: tab 7)", disabled=True) for name in functions)

    def show_resolved(self, settings: Settings) -> None:
        """Mark the function an analysis ran (the default one resolved to its name), and note how
        many devices its target has (the mesh laid over them)."""
        self.function = settings.function
        if settings.targets:
            self._target_devices[settings.targets[0]] = settings.mesh.devices
            if settings.mesh.devices > self.max_devices:  # the run started a CPU device per chip: they stay
                self.max_devices = settings.mesh.devices
                self._offer_devices()
            if len(settings.mesh.names) == 1 and not self.query_one("#mesh", Input).value.strip():
                self._show_device_count(settings.mesh.devices)  # the picker says what the slice gave
        self._show_functions()
        self._update_mesh_fields()
        self._update_chunk_help()

    def show_compared(self, baseline: str, candidate: str) -> None:
        """Mark a program file's compared programs in the list (``B``, ``C``)."""
        self.compared = (baseline, candidate)
        self._show_functions()

    # -- internals ---------------------------------------------------------------------

    @property
    def _current_function(self) -> str | None:
        return self.function or (self.functions[0] if self.functions else None)

    def _show_functions(self) -> None:
        options = self.query_one("#functions", OptionList)
        current = self.compared[1] if self.programs and self.compared else self._current_function
        labels = [self._function_label(name, current) for name in self.functions]
        with self.prevent(OptionList.OptionHighlighted):
            shown = [options.get_option_at_index(index) for index in range(options.option_count)]
            if [option.id for option in shown] != self.functions or not all(
                    same_content(option.prompt, label) for option, label in zip(shown, labels)):
                options.clear_options()  # rebuilt only when a label changed: the list lays the screen out
                options.add_options(Option(label, id=name) for name, label in zip(self.functions, labels))
            if current in self.functions:
                options.highlighted = self.functions.index(current)
        descriptions = getattr(self, "_descriptions", {})
        description = descriptions.get(current or "", "")
        if self.programs and description:
            description = f"{current}: {description}"
        update_if_changed(self.query_one("#description", Static), Text(description, "dim italic"))

    def _function_label(self, name: str, current: str | None) -> Text:
        """``● linear`` for the demo picked; ``B step`` / ``C step_fixed`` for compared programs."""
        if not self.programs:
            return Text.assemble(("● " if name == current else "  "), name)
        baseline, candidate = self.compared or ("", "")
        mark = "B " if name == baseline else "C " if name == candidate else "  "
        if name == baseline == candidate:
            mark = "= "
        return Text.assemble((mark, "bold"), name)

    def _fields_mesh(self) -> Mesh | None:
        """The mesh the fields show (None while one is not valid)."""
        try:
            mesh_text = self.query_one("#mesh", Input).value.strip()
            if mesh_text:
                return Mesh.parse(mesh_text)
            devices = _count(self.query_one("#devices", Select))
            return Mesh.one_axis(check_axis_name(self.query_one("#axis", Input).value.strip()), devices)
        except (SettingsError, TypeError):
            return None

    def _mesh_is_the_demos(self) -> bool:
        """True while the fields show the mesh the sidebar filled in from the demo."""
        return self._auto_mesh is not None and self._fields_mesh() == self._auto_mesh

    def _show_demo_mesh(self) -> None:
        """Fill the mesh fields with the current demo's own mesh (the default ``s=2`` if it has none)."""
        mesh = self._demo_meshes.get(self._current_function or "") or Mesh.one_axis(DEFAULT_AXIS, DEFAULT_DEVICES)
        one_axis = len(mesh.axes) == 1 and mesh.devices <= self.max_devices
        select = self.query_one("#devices", Select)
        with self.prevent(Input.Changed, Select.Changed):
            if one_axis:
                options = sorted({*self._device_choices, mesh.devices})
                select.set_options([(str(n), n) for n in options])
                select.value = mesh.devices
            self.query_one("#axis", Input).value = mesh.names[0]
            self.query_one("#mesh", Input).value = "" if one_axis else mesh.text()
            self.query_one("#batch-axes", Input).value = ""
        self._auto_mesh = mesh

    def _show_device_count(self, devices: int) -> None:
        """Show ``devices`` in the (disabled) Devices picker, offered even above ``--max-devices``."""
        select = self.query_one("#devices", Select)
        if self._devices_before_target is None:
            self._devices_before_target = _count(select)
        with self.prevent(Select.Changed):
            if devices not in self._device_choices:
                self._device_choices = sorted({*self._device_choices, devices})
                select.set_options([(str(n), n) for n in self._device_choices])
            select.value = devices

    def _offer_devices(self) -> None:
        select = self.query_one("#devices", Select)
        batch = self.batches.get(self._current_function or "")
        counts = list(range(1, self.max_devices + 1))
        if batch is not None:
            counts = [d for d in divisors(batch) if d <= self.max_devices]
        current = _count(select)
        self._device_choices = counts
        with self.prevent(Select.Changed):
            select.set_options([(str(n), n) for n in counts])
            select.value = current if current in counts else max(d for d in counts if d <= current)

    def _typed_targets(self) -> tuple[str, ...]:
        """The target typed, as ``tpu:TOPOLOGY`` or ``gpu:NAME:DEVICES`` (empty: none); :class:`SettingsError` for a typo."""
        text = self.query_one("#target", Input).value.strip()
        return (parse_target(text).text(),) if text else ()

    def _typed_target(self) -> str | None:
        """The target typed, when it is one (None: empty, or not a target yet)."""
        try:
            targets = self._typed_targets()
        except SettingsError:
            return None
        return targets[0] if targets else None

    def _devices(self) -> int:
        """The device count of a 1-D mesh: the Devices picker's, or the target's once it is known
        (while a target is set, it sets the count)."""
        target = self._typed_target()
        if target is not None and target in self._target_devices:
            return self._target_devices[target]
        return _count(self.query_one("#devices", Select))

    def _typed_chunk(self) -> int | None:
        text = self.query_one("#chunk", Input).value.strip().lower()
        if text in ("", "auto"):
            return None
        try:
            value = int(text)
        except ValueError:
            raise SettingsError(f"The chunk size {text!r} is not a whole number.", "type a number, or leave it empty for auto") from None
        return value

    def _per_device_batch(self) -> int | None:
        batch = self.batches.get(self._current_function or "")
        if batch is None:  # also while composing, before the device picker exists
            return None
        mesh_text = self.query_one("#mesh", Input).value.strip()
        if mesh_text:
            try:
                mesh = Mesh.parse(mesh_text)
                axes_text = self.query_one("#batch-axes", Input).value.strip()
                shards = mesh.size_of(mesh.check_axes(parse_axes(axes_text) if axes_text else mesh.names, "batch axes"))
            except SettingsError:
                return None
            return None if batch % shards else batch // shards
        target = self._typed_target()
        if target is not None and target not in self._target_devices:
            return None  # the slice's device count is not known before it loads
        devices = self._devices()
        if not isinstance(devices, int) or batch % devices:
            return None
        return batch // devices

    def _chunk_is_valid(self, text: str) -> bool:
        text = text.strip().lower()
        if text in ("", "auto"):
            return True
        if not text.isdigit() or int(text) < 1:
            return False
        per_device = self._per_device_batch()
        return per_device is None or per_device % int(text) == 0

    def _update_chunk_help(self) -> None:
        help_text = self.query_one("#chunk-help", Static)
        chunk = self.query_one("#chunk", Input)
        chunk.validate(chunk.value)
        per_device = self._per_device_batch()
        if per_device is None:
            update_if_changed(help_text, "a divisor of the per-device batch; empty = auto")
        else:
            valid = " ".join(map(str, divisors(per_device)))
            update_if_changed(help_text, f"{per_device}/device: {valid}\n(empty = auto = {default_chunk_size(per_device)})")
        help_text.set_class(not self._chunk_is_valid(chunk.value), "-invalid")

    @on(OptionList.OptionSelected, "#functions")
    def _function_picked(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id is None:
            return
        if self.programs:
            self.post_message(self.CandidatePicked(event.option.id))
            return
        follow = self._mesh_is_the_demos()
        self.function = event.option.id
        self._show_functions()
        if follow:  # the fields showed the previous demo's own mesh: show this one's
            self._show_demo_mesh()
        self._offer_devices()
        self._update_chunk_help()
        self.post_message(self.Edited())
        self.post_message(self.Changed())

    @on(Select.Changed, "#devices")
    def _devices_picked(self, event: Select.Changed) -> None:
        event.stop()
        self._update_chunk_help()
        self.post_message(self.Edited())
        self.post_message(self.Changed())

    @on(Input.Changed, "#chunk, #mesh, #batch-axes, #target")
    def _chunk_typed(self, event: Input.Changed) -> None:
        event.stop()
        self._update_chunk_help()
        self._update_mesh_fields()
        self.post_message(self.Edited())

    def _update_mesh_fields(self) -> None:
        """A named mesh sets the device count and the axes: the 1-D fields then do not apply.

        They are disabled (the Devices picker would still say 2 beside ``data=4,model=2``) and a
        note under the mesh says what it sets; clearing the mesh gives them back.
        """
        mesh = self._typed_mesh()
        target = self._typed_target()
        note = self.query_one("#mesh-note", Static)
        self.query_one("#devices").disabled = mesh is not None or target is not None
        self.query_one("#axis").disabled = mesh is not None
        note.set_class(mesh is not None, "-shown")
        if mesh is not None:
            update_if_changed(note, f"{mesh.devices} devices, axes {', '.join(mesh.names)}: the mesh replaces "
                                    "Devices and Mesh axis name above (clear it to use them)")
        self._update_target_note(mesh, target)

    def _update_target_note(self, mesh: Mesh | None, target: str | None) -> None:
        """What the target field sets: the slice's devices, compiled for and never run."""
        note = self.query_one("#target-note", Static)
        typed = self.query_one("#target", Input).value.strip()
        note.set_class(bool(typed), "-shown")
        if not typed and self._devices_before_target is not None:  # cleared: the picker's own count again
            self._restore_devices()
        if target is None:
            update_if_changed(note, Text("not a target: tpu:TOPOLOGY or gpu:NAME:DEVICES, e.g. tpu:v5e:2x2, gpu:h100:8", "bold red"))
            return
        count = self._target_devices.get(target)
        devices = f"its {count} devices" if count is not None else "its devices (counted when it loads)"
        if self.programs:
            said = "each program's mesh must span as many devices as the target has"
        elif mesh is not None:
            said = f"the named mesh must span {devices}"
        else:
            said = f"the mesh spans {devices} (Devices above does not apply)"
        update_if_changed(note, Text(f"compiled for {target}, never run there: {said}", "dim"))

    def _restore_devices(self) -> None:
        """Give the Devices picker back the count it had before a target's slice showed in it."""
        devices, self._devices_before_target = self._devices_before_target, None
        select = self.query_one("#devices", Select)
        if devices in self._device_choices:
            with self.prevent(Select.Changed):
                select.value = devices
        self._update_chunk_help()

    def _typed_mesh(self) -> Mesh | None:
        """The named mesh typed (None when empty or not a mesh yet)."""
        text = self.query_one("#mesh", Input).value.strip()
        try:
            return Mesh.parse(text) if text else None
        except SettingsError:
            return None

    @on(Input.Changed, "#axis")
    def _axis_typed(self, event: Input.Changed) -> None:
        event.stop()
        self.post_message(self.Edited())

    @on(Input.Submitted)
    def _input_committed(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(self.RunAsked())


def _count(select: Select[int]) -> int:
    """The device count a picker shows: it is made with ``allow_blank=False``, so it always has one
    (Textual types the value as maybe unselected)."""
    value = select.value
    assert isinstance(value, int)
    return value


def _is_axis_name(text: str) -> bool:
    """True for what :func:`~shardscope.config.settings.check_axis_name` accepts (ASCII identifiers)."""
    try:
        check_axis_name(text.strip())
    except SettingsError:
        return False
    return True
