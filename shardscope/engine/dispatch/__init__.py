"""A step that is not jitted and calls jitted functions, read as its sequence of dispatches: which
steps are read so (``plan.is_dispatch_sequence``), each call's module compiled alone (``calls``),
the results the step only adds up across its calls (``sums``), and the ``DispatchPlan`` (``plan``)."""
