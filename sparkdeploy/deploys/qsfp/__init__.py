"""The QSFP link to the peer: NetworkManager profiles per rail, the path proven, the engine
environment written from what the proof found."""
