"""The per-node prefill profile (`lab profile`): its lifecycle, references, derivation, dump, rates and efficiency."""
