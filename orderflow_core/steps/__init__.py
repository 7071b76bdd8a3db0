"""One module per step kind, each holding the kind's `StepDefinition`: how the step starts,
the call it makes, how the call's answers are classified, and what each result does.

`orderflow_core.steps.registry` collects them; a process version (`orderflow_core.process`)
says which of them its orders run.
"""
