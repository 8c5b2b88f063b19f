"""The pipeline steps other than the launch, one package each: data prep (prep), evaluation (evaluate), export
(export); each package's component.py is the body of its component."""
