"""Terminal renderers: one module per result type, each printing to a rich Console it is given."""
