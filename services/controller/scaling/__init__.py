"""DS2 scaling in the controller: true rates from useful time (:mod:`.ds2`), decisions over time
with warm-up, activation and a scale-down delay (:mod:`.decisions`). Pure: the controller's loop
feeds them measurements and writes what they decide to the control log."""
