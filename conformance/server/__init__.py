"""The Core HTTP surface: wire clients, checks, corpus and world, the contract model and its stateful driver."""
