"""The Helm chart and the Dockerfile."""
