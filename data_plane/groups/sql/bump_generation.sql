UPDATE consumer_groups SET generation = generation + 1, updated_at = now() WHERE id = %(id)s RETURNING generation
