"""Rollout replicas on the critic's pool too, joined to verl's load balancer and weight sync."""
