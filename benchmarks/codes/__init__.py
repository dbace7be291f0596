"""What the latent codes carry: the official LogicLatents protocol side by side, interventions
on the codes, Fig. A8 (docs/RESULTS.md)."""
