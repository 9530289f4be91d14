"""The critic's attention: verl's value-model loader asks for flash-attn whatever the job's config says."""
