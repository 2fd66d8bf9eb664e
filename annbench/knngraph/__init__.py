"""knngraph for the ann-benchmarks harness: module.py (the BaseANN wrappers), config.yml, Dockerfile."""
