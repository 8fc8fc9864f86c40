"""The controller loop: one keyed work queue decides when each KimiDeployment is reconciled
(docs/architecture.md, "The controller loop")."""
