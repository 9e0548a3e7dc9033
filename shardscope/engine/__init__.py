"""The analysis engine: shardscope's model of a traced program (jaxpr) and of the compiled
module, the collectives each runs, in which loops, how often, and whether they must."""
