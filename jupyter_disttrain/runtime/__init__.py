"""Code that runs inside each worker process.

Imports only the standard library, torch (or tensorflow, or jax) and
cloudpickle, so that it runs in a stock framework image. Nothing here imports the notebook
side of the package; importing this package itself imports nothing heavy.
"""
