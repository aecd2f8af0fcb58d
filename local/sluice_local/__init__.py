"""Local development tooling for sluice (never deployed): load and run functions like Lambda does."""
