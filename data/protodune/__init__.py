"""ProtoDUNE-SP-like LArTPC simulation (generate.py), EmTrkMichelId definition, training and export."""
