"""The loop: registry, game runner, reward pipelines, scheduler/collector and trainer stages."""
