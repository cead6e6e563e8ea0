"""Places a job can run: the Backend interface, the local backend and Kubernetes."""
