"""The compiled view: the module text XLA prints, its loops and collectives, paired with the jaxpr."""
