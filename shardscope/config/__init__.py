"""What a run is made of, as values every layer may name: its settings, its mesh, and the
sizes that follow from them."""
