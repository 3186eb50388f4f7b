"""UNIMAL morphologies: genome, mutation operators, MJCF builder, initial population."""

from derl.morphology.genome import Genome, GenomeError, Joint, LimbGroup
from derl.morphology.mjcf import to_mjcf
from derl.morphology.mutations import OPERATORS, mutate, random_genome

__all__ = ["OPERATORS", "Genome", "GenomeError", "Joint", "LimbGroup", "mutate", "random_genome", "to_mjcf"]
