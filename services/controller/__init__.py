"""The controller: plans rebalances from router load and is the only writer of the control log."""
