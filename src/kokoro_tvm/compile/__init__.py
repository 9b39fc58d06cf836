"""The compile flow: torch.export -> Relax import -> legalize -> schedule (+ tune) -> build."""
