"""The jaxpr view: what a program writes (model, value flow, linearity, dataflow graph, verdicts)."""
