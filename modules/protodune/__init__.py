"""The ProtoDUNE workflow: hits → 48×48 patches → EmTrkMichelId scores (see README.md here)."""
