"""UNIMAL morphologies: genome, mutation operators, MJCF builder, initial population."""

from derl.morphology.genome import Genome, Joint, LimbGroup
from derl.morphology.genome_checks import GenomeError
from derl.morphology.mjcf import to_mjcf
from derl.morphology.mutations import OPERATORS, mutate, random_genome
from derl.morphology.population import initial_population, species_labels

__all__ = [
    "OPERATORS", "Genome", "GenomeError", "Joint", "LimbGroup",
    "initial_population", "mutate", "random_genome", "species_labels", "to_mjcf",
]
