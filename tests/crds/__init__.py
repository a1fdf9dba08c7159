"""CRD schemas, example custom resources and invalid cases."""
