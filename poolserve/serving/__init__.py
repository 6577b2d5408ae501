"""The serving step every front end drives (HTTP's routes, the gRPC servicer): what their
requests share (`serving_state`), a translated request's context, time limit and run on the
model's engine (`serving_step`), what may end a waiting request's wait (`answer_waits`), and the
shutdown's grace period (`shutdown`)."""
