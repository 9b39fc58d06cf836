"""The compile flow: torch.export -> Relax import -> legalize -> schedule (+ tune) -> build
(``phases`` lists the passes in order)."""
