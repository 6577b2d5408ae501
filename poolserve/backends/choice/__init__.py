"""`--backend auto`: the runtime and precision measured fastest for a model on this machine
(`auto_backend`): the candidates the machine and the model allow (`candidates`), each built as its
own backend, timed over real text and judged against torch float32 (`trial`, its runners in `crew`),
all of them in turn within one time budget (`trial_round`, `trial_budget`), the choice kept in the
cache for the next start (`choice_cache`) and shown as a table (`choice_table`)."""
