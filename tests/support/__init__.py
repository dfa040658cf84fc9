"""What the tests share and are not tests themselves: fixtures' databases and servers, the
simulator's scripted platforms, fakes of the sync's ports, samples, fault injectors and
checks against the simulator's truth (``from support.<module> import ...``)."""
