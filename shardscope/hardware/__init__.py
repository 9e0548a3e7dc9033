"""What a target's machine is, below the engine that carries it: its chips' figures (`chips`,
checked against real chips: `checked`), whether a step fits in their memory (`fit`), and the
machine record a target owns (`machines`) with its interconnect's one cost model (`fabrics`,
`nccl` on the channels of `nccl_search`, `collective_models`)."""
