"""One program read both ways, on top of the engine's levels: its jaxpr (``jaxpr/``), its compiled
module (``hlo/``) and its dispatches (``dispatch/``) joined into the ``Inspection`` (``inspection``),
and a rematerialization's fix compiled and checked (``remat_fixes``)."""
