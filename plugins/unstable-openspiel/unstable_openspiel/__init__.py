"""unstable-openspiel: OpenSpiel's two-player turn-based games as environments, the exact
exploitability of a policy (OpenSpiel's own NashConv), and CFR / best-response opponents."""

__version__ = "0.1.0"
