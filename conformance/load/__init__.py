"""The contract under concurrency: a Locust profile (see README, "Conformance under load")."""
