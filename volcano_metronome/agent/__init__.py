"""The node agent: samples this node's NIC, fits the traffic of the gang that owns it, and writes the
measured profile into that gang's STBandwidthClaim status (``owners`` decides which gang; ``node`` runs)."""
