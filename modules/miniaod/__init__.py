"""The CMS MiniAOD workflow: ParticleNet (AK4, AK8), DeepMET and DeepTau producers with CMS's input layouts.

See README.md in this folder for the physics and ``configs/miniaod.yaml`` for the job.
"""
