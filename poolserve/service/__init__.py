"""Loaded models as every entrance serves them: one model's engine core, tasks and facts
(`model_service`), and the models of a server or a `ModelSet` by the names they are served under,
on one CPU pool (`registry`)."""
